"""Analyses of saved validation runs (no GPU): what `fuseplanner analyze` prints.

Each module reads the typed runs `fuseplanner validate` writes (records.jsonl; `runs.load_runs`, by
default with every `ours` prediction and fuse decision recomputed with a GPU spec) and returns typed
rows; `tables` turns them into plain-text tables (`Table`) that the command line prints with rich or
writes as markdown.

- `accuracy`: prediction errors and fuse decisions per run and pooled;
- `decisions`: fuse decisions against the threshold, and the groups that disagree;
- `tile_choices`: the tiles the planner gives layers swept alone, against the measured best;
- `register_checks`: the compiled-register table against recorded launches, and spills;
- `plan_totals`: the summed predicted and measured time of whole plans.
"""
