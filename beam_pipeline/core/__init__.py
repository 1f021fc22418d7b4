"""The pure core: annotations, labels, images, examples, sharding; data quality in `quality/`.
No Beam, no file system."""
