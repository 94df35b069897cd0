"""One folder per kernel family: `__init__.py` (the family object, `fuseplanner.kernels.family.KernelFamily`:
its tiles' meaning, shared memory and feasibility rules), `cost.py` (its cost model classes), `launch.py`
(its launchers) and its CUDA sources. `fuseplanner.kernels.family` registers them."""
