"""A run written in other tools' formats (`bench export`), beside bench/imports that reads theirs: llm-d's
Benchmark Report (`llmd_schema` its fields, `llmd_report` a level as one) and a CSV of every level's figures."""
