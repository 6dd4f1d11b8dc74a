"""The configs shipped with lorarag as package data (lorarag.core.paths.packaged_config): bench and the
wheel test read them from an installed package as from a checkout."""
