"""The master's commands: argument parsing and the steps each command takes."""
