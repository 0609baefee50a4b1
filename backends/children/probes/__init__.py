"""Deep-probe functions, run by selector's probe runner (selector.inspect.probing) in a child process.

Each function takes the probe's argument (or None) and a context dict and returns a result dict
(see _util.py); selector.core.probe_specs names them as "selector.backends.children.probes.<module>:<function>".
"""
