"""The study layer: world or knowledge base -> index -> train -> calibrate -> evaluate -> report."""
