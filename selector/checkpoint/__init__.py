"""Checkpoint reading: a model directory's config files to the layers an engine builds and their
quantization schemes. Imports core only.
"""
