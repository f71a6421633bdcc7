"""Tasks out and back: the task resolver (a task as data), specs, planning helpers, shards, export, cards glue and publishing."""
