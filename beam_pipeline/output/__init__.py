"""The output directory: preparing and locking it, committing a build, reading one back."""
