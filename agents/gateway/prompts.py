"""Chat messages → prompt ids that extend what the engine already consumed, and replies back.

The harness sends its whole history each call. The gateway renders it with the model's chat
template (the truth of what the model sees at inference) and then keeps the engine's ids:

- an assistant message the gateway itself returned is rendered from the text the model
  actually wrote (its tool-call markup, its thinking), not from the parsed
  ``content``/``tool_calls``, whose re-rendering would differ in whitespace or key order;
- if the rendered text starts with the decoded tail (prompt + completion) of one of the
  episode's segments, the prompt is that tail's exact ids plus the encoding of the rest
  only: the engine is given, and the trajectory holds, the very ids sampled before, never a
  re-tokenization of them;
- otherwise (the template or the harness rewrote history: thinking dropped, turns
  summarised) the text is encoded whole and the call starts a new segment.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from arborl.envs.parsers import ToolCallParser, strip_thinking

from .episodes import Segment
from .errors import BadRequest
from .images import has_images, image_parts


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Ids → text, special tokens kept (byte-level BPE decodes its encodings exactly)."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))


#: Ids before the new ones that `extend_decoded` decodes again: enough for a tokenizer's
#: decoder to see the same context at the seam (a byte-level BPE needs none; a SentencePiece
#: decoder's leading space is decided by the first id alone).
SEAM = 8


def extend_decoded(tokenizer: Any, text: str, ids: Sequence[int], more: Sequence[int]) -> str:
    """``decode(ids + more)``, given ``text == decode(ids)``, in time for `more` alone.

    A call through the gateway extends its segment's tail; decoding the whole tail again each
    call would cost time in the length of the context (a SWE episode's 30k tokens: ms a call).
    Here the last `SEAM` ids of `ids` (4 x as many where they start inside a character) are
    decoded with `more` and the part after their own decoding is appended: exact where the
    seam falls between characters (UTF-8 decoding is then a concatenation). Where it may not
    (a text ending in U+FFFD, the replacement of a character cut in two; a seam whose decoding
    is not a prefix of the longer one's, or not the end of `text`), the whole is decoded as
    before.
    """
    if not more:
        return text
    if not ids or not text or text.endswith("\ufffd"):
        return decode(tokenizer, [*ids, *more])
    for width in (SEAM, 4 * SEAM):  # wider where the seam starts inside a character (emoji: 4 ids)
        seam = list(ids[-width:])
        head = decode(tokenizer, seam)
        if head.startswith("\ufffd") and width < len(ids):
            continue
        both = decode(tokenizer, [*seam, *more])
        if head and not head.endswith("\ufffd") and both.startswith(head) and text.endswith(head):
            return text + both[len(head) :]
        break
    return decode(tokenizer, [*ids, *more])


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def reply_key(
    content: str | None, tool_calls: Sequence[dict[str, Any]] | None, reasoning: str | None = None
) -> str:
    """What identifies a returned assistant message when the harness sends it back (with its
    reasoning when the harness keeps it: two replies may differ only in their thinking)."""
    calls = []
    for tc in tool_calls or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args)
        calls.append([fn.get("name"), args])
    key = [content or "", calls, *([reasoning] if reasoning else [])]
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"{where}: only text content parts are supported, got {kind!r}", param=where)
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts", param=where)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """Tool calls with their arguments as objects (what chat templates expect)."""
    if not isinstance(calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list", param=where)
    out = []
    for j, tc in enumerate(calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}.tool_calls[{j}] needs a function with a name", param=where)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise BadRequest(
                    f"{where}.tool_calls[{j}].function.arguments is not valid JSON", param=where
                ) from None
        out.append({**tc, "function": {"name": fn["name"], "arguments": args}})
    return out


def template_messages(
    messages: Sequence[dict[str, Any]], replies: dict[str, str], images: bool = False
) -> list[dict[str, Any]]:
    """The request's messages as the template takes them, the model's own replies restored;
    with `images` (a vision-language model), image_url parts decoded (`images.py`)."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = "system" if m["role"] == "developer" else m["role"]
        if role != "assistant" and has_images(m.get("content")):
            if not images:
                raise BadRequest(
                    f"{where}: this model reads text only: only text content parts are supported "
                    "(serve a vision-language model with its processor to send image_url parts)",
                    param=where,
                )
            out.append({"role": role, "content": image_parts(m["content"], where)})
            continue
        content = _text(m.get("content"), where)
        if role == "assistant":
            raw = replies.get(reply_key(m.get("content"), m.get("tool_calls"), m.get("reasoning_content")))
            if raw is None:
                raw = replies.get(reply_key(m.get("content"), m.get("tool_calls")))
            if raw is not None:
                out.append({"role": "assistant", "content": raw})
                continue
            msg: dict[str, Any] = {"role": role, "content": content}
            if m.get("tool_calls"):
                msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
            out.append(msg)
            continue
        msg = {"role": role, "content": content}
        if role == "tool" and m.get("tool_call_id") is not None:
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The chat template's rendering, ending with the generation prompt."""
    try:
        return str(
            tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        )
    except Exception as e:  # jinja raises its own types for a template that cannot render these messages
        raise BadRequest(
            f"the model's chat template cannot render these messages: {type(e).__name__}: {e}"
        ) from e


def splice(tokenizer: Any, text: str, segments: Sequence[Segment]) -> list[int]:
    """Prompt ids for `text`: the longest segment tail it extends, exact, plus the rest encoded."""
    best: Segment | None = None
    for seg in segments:
        if text.startswith(seg.tail_text) and (best is None or len(seg.tail_text) > len(best.tail_text)):
            best = seg
    if best is None:
        return encode(tokenizer, text)
    return best.tail + encode(tokenizer, text[len(best.tail_text) :])


def completion_text(tokenizer: Any, ids: Sequence[int], finish_reason: str) -> str:
    """The text the model wrote, without the stop token that ended it (the template adds its own)."""
    body = ids[:-1] if finish_reason == "stop" and ids else ids
    return decode(tokenizer, body)


def parse_reply(
    raw: str, parser: ToolCallParser | None, tools: list[dict[str, Any]] | None
) -> tuple[str | None, str | None, list[dict[str, Any]]]:
    """(content, reasoning, tool calls) of a reply, OpenAI-shaped.

    A reply whose tool-call markup does not parse comes back as plain content (the harness
    then sees what the model wrote), with no tool calls.
    """
    end = raw.rfind("</think>")
    reasoning = raw[:end].replace("<think>", "", 1).strip() if end >= 0 else None
    prose = strip_thinking(raw).lstrip() if reasoning is not None else raw
    if parser is None:
        return prose, reasoning, []
    schemas = {
        (t.get("function") or t).get("name", ""): (t.get("function") or t).get("parameters") or {}
        for t in tools or []
    }
    parsed = parser.parse(raw, schemas)
    if parsed.errors or not parsed.calls:
        return prose, reasoning, []
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in parsed.calls
    ]
    return (parsed.content or None), reasoning, calls
