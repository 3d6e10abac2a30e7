"""Servers shipped for checking clients against known truth; not part of the load path."""
