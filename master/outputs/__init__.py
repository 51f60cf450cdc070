"""What a run writes and serves: requests.csv and summary.json, stats history, replayer health, live
metrics, registry metrics, the original trace player's output."""
