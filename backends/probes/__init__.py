"""Deep-probe functions, run by selector's probe runner (selector.probing) in a child process.

Each function takes the probe's argument (or None) and a context dict and returns a result dict
(see _util.py); selector.probe_specs names them as "selector.backends.probes.<module>:<function>".
"""
