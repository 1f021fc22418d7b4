"""The tree walk: listing the input tree, detecting its layout, planning and pairing its files."""
