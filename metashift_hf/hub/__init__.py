"""Tasks out and back: the task resolver (a task as data), a repo's files, planning helpers, shards, export, cards glue and publishing."""
