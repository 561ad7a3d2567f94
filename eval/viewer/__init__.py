"""`arborl view DIR`: a trajectory viewer, one HTML page over a training run or an eval run.

    from arborl.eval.viewer import load_dir, write_page, serve_page
    page = load_dir("runs/eval/desktop-mini-model")   # or a training run's run.dir
    write_page(page)                                   # runs/eval/desktop-mini-model/view.html

Per episode: the chat as the model saw it (an eval's transcript; a training trajectory's ids
decoded with the run's tokenizer), each turn's reply, tool calls and results, rewards and
returns, screenshots where the observations had any, and for evals the grade and its log.
Filters by suite, outcome and step (training runs: the policy version that sampled it).

- `model`  the page's data (episodes, turns, a shared table of texts)
- `runs`   training run directories: trajectories/*.parquet, sft/demos.parquet, metrics.jsonl
- `evals`  eval run directories: results.sqlite and instances/<id>/sample-<k>/
- `page`   rendering (`page.html`, Jinja2, autoescaped), writing, serving on 127.0.0.1
"""

from .model import PageData
from .page import NotViewable, load_dir, render, serve_page, write_page

__all__ = ["NotViewable", "PageData", "load_dir", "render", "serve_page", "write_page"]
