"""Pools written outside kvstress: two correct ones and a zoo of deliberately broken ones."""
