"""What a person sees while a build runs: the console, live counts, the summary."""
