"""BFCL v4 (the Berkeley Function-Calling Leaderboard), from the `bfcl-eval` package.

- `official`: importing bfcl-eval's checker (installed `--no-deps`; why a stand-in model table).
- `data`: BFCL's data files per category as `BfclTask`s (prompt entry + possible answer).
- `backends`: the multi-turn backends, fresh per run, reached only through parsed calls.
- `grading`: the score, by bfcl-eval's `ast_checker`, `state_checker`, `response_checker`.
- `policies`: gold (from possible_answer) and empty policies.
- `suites`: `bfcl-simple`, `bfcl-multiple`, ..., `bfcl-multi-turn` (docs/benchmarks.md).
- `result_files`, `decoding`, `rescoring`: bfcl-eval's result files read as they are, replies
  decoded as its handlers decode them, and scored entry by entry as its runner scores them.
"""
