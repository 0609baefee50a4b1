"""The bottom floor of ``backends``: what every other floor may use and that uses none of them.

``constants`` (the element formats' ranges and the MoE activation names and defaults, which
kernels, references and wrappers all read) and ``validate`` (the one input check of every
backend's prepare/apply and of the references, with the output buffer). Imports no torch.
"""
