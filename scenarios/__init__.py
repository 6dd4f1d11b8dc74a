"""Scenario and data layer: scenario records, the demo world, scenario generators, importers."""
