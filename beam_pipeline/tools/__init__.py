"""The command line: build, plan, show, inspect, stats, verify, upgrade, sample."""
