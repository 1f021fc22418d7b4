"""The pure core: annotations, labels, images, examples, sharding. No Beam, no file system."""
