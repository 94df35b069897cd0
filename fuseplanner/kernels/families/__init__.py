"""One module per kernel family: its tiles' meaning, shared memory and feasibility rules, and a
family object (`fuseplanner.kernels.family.KernelFamily`) that also names its cost model, launcher and
CUDA source. `fuseplanner.kernels.family` registers them."""
