"""Series of runs: experiments across registries, repetitions, capacity ramps."""
