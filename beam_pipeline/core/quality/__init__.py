"""Data quality, pure: the images' fingerprints (`fingerprints`), the search for near hashes
(`hash_search`), copies within a split and their rules (`duplicates`), leakage across splits
(`leaks`), odd images (`odd_images`). The Beam stages that run them: `stages.duplicates`."""
