"""The command line (`python -m selector ...`) and what only it uses. The top layer: nothing
imports it.
"""
