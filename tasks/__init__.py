"""arborl.tasks: what the environments are asked to do (plain data, no behaviour)."""

from .spec import BASE_IMAGE, CodeTask, Document, Task, ToolDecl, ToolTask, coerce_task, load_corpus

__all__ = ["BASE_IMAGE", "CodeTask", "Document", "Task", "ToolDecl", "ToolTask", "coerce_task", "load_corpus"]
