"""The entry points of the child processes selector starts: `tune_child` (`selector tune`),
`verify_child` with its problems and measures (`verify_problems`, `verify_measures`:
`doctor --verify`) and `probes` (`doctor`'s deep probes).

The top floor: they may use every floor below; selector itself never imports them.
"""
