"""The core: layer and platform vocabulary, rule kinds, the typed run config, the resolver (filter,
then order) and the decision with its renderers. Imports nothing else of selector.
"""
