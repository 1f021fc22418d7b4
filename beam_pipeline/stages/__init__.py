"""The Beam stages of a build: discovery, labelling, writing, finalize, and what crosses them."""
