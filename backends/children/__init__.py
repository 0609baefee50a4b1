"""The child-process entry points selector starts (never imported by selector itself): ``tune_child``
(``selector tune``), ``verify_child`` with its problems ``verify_problems`` (``doctor --verify``)
and ``probes`` (``doctor``'s deep probes). The top floor: they may use every floor below."""
