"""`constants` (the element formats' largest values, the MoE activations and their defaults) and
`validate` (the one input check of every prepare/apply and reference, and the output buffer).

The bottom floor of ``backends``: every other floor may use it and it uses none of them.
Imports no torch.
"""
