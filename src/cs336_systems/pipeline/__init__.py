"""What the Snakefile calls: config validation, code dependencies, GPU leases.

Nothing here imports torch, so parsing the workflow stays fast.
"""
