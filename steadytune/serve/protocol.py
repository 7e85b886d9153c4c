"""The OpenAI HTTP API as the `openai` Python SDK speaks it: request and response bodies (pydantic).

Unknown fields are ignored, as OpenAI-compatible servers do, but options we do not implement (tools, logprobs,
penalties, vLLM's best_of, beam search, guided decoding, ...) are refused when set to anything but the value that
changes nothing: answering as if they had been applied would be wrong. Values are strictly typed, as OpenAI's API
types them: `max_tokens: true` or `"5"` is a 400 (pydantic's lax mode read true as 1), an integer field takes no
1.0, a boolean no "yes". Every string a request
carries into the server (`Text`) must be Unicode text: JSON can spell a lone UTF-16 surrogate ("\ud800"), which no
tokenizer or UTF-8 encoder takes, so it is refused here, with 400, before anything else sees it.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

MAX_SEED = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")  # left in a str by JSON's \uXXXX escapes when not a valid pair


def _unicode_text(value: str) -> str:
    if _SURROGATE.search(value):
        raise ValueError("holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not Unicode text")
    return value


Text = Annotated[str, AfterValidator(_unicode_text)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class TextPart(_Body):
    type: Literal["text"]
    text: Text


class ImageUrl(_Body):
    url: Text          # a data URL (data:image/png;base64,...); a local path only with --allow-local-images
    detail: Optional[Literal["auto", "low", "high"]] = None   # accepted; images are sized by the run's image keys


class ImageUrlPart(_Body):
    """An image in a user message (vision-language models: serve/media.py reads it; nothing is fetched)."""
    type: Literal["image_url"]
    image_url: ImageUrl


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[Text, list[Union[TextPart, ImageUrlPart]], None] = None
    name: Optional[Text] = None
    tool_calls: Optional[list] = None

    def text(self) -> str:
        """The message's text (its image parts are read by serve/media.py)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if part.type == "text")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: Text = Field(min_length=1, max_length=256)
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)   # vLLM's extension: the k most likely tokens only; -1 or 0: all
    min_p: float = Field(0.0, ge=0.0, le=1.0)   # vLLM's extension: tokens at least min_p x the top one's probability
    # vLLM's extension: > 1 discourages the prompt's and the answer's tokens (transformers' repetition_penalty). At
    # least 0.1: a positive logit is divided by it, and a penalty near zero (5e-324 passes `> 0`) makes it infinite
    repetition_penalty: float = Field(1.0, ge=0.1, le=10.0)
    n: int = Field(1, ge=1)
    stop: Union[Text, list[Text], None] = None
    seed: Optional[int] = Field(None, ge=0, le=MAX_SEED)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    user: Optional[Text] = None
    # vLLM's extension: generate exactly max_tokens (end tokens do not stop the answer); for load tests.
    ignore_eos: bool = False
    # Known OpenAI options that this server does not implement; refused unless left at their neutral value.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[dict] = None
    # vLLM's extensions that change the answer and are not implemented here (NEUTRAL: the values that change nothing)
    best_of: Optional[Any] = None
    use_beam_search: Optional[Any] = None
    length_penalty: Optional[Any] = None
    min_tokens: Optional[Any] = None
    stop_token_ids: Optional[Any] = None
    include_stop_str_in_output: Optional[Any] = None
    allowed_token_ids: Optional[Any] = None
    bad_words: Optional[Any] = None
    prompt_logprobs: Optional[Any] = None
    truncate_prompt_tokens: Optional[Any] = None
    guided_json: Optional[Any] = None
    guided_regex: Optional[Any] = None
    guided_choice: Optional[Any] = None
    guided_grammar: Optional[Any] = None
    structured_outputs: Optional[Any] = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value):
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(len(s) > 256 for s in stops):
            raise ValueError("a stop sequence may have at most 256 characters")
        return [s for s in stops if s]

    def unsupported(self) -> Optional[str]:
        """The first option set that this server would otherwise ignore."""
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty" if self.presence_penalty else "frequency_penalty"
        if self.logit_bias:
            return "logit_bias"
        return next((key for key, neutral in NEUTRAL.items()
                     if key in type(self).model_fields and not _is_neutral(getattr(self, key), neutral)), None)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# Options set to one of these values (or absent) change nothing (vLLM's defaults); any other value is refused.
NEUTRAL: dict[str, tuple] = {
    "best_of": (1,), "use_beam_search": (False,), "length_penalty": (1, 1.0), "min_tokens": (0,),
    "stop_token_ids": ([],), "include_stop_str_in_output": (False,), "allowed_token_ids": (), "bad_words": ([],),
    "prompt_logprobs": (), "truncate_prompt_tokens": (), "guided_json": (), "guided_regex": (), "guided_choice": (),
    "guided_grammar": (), "structured_outputs": (),
    # chat only
    "echo": (False,), "continue_final_message": (False,), "add_generation_prompt": (True,), "prediction": (),
    "audio": (), "modalities": (["text"],),
}


def _is_neutral(value: Any, neutral: tuple) -> bool:
    """None, or one of the neutral values of the same type (true is not 1 here)."""
    return value is None or any(type(value) is type(n) and value == n for n in neutral)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list] = None
    tool_choice: Optional[Union[str, dict]] = None
    functions: Optional[list] = None
    response_format: Optional[dict] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    # vLLM's chat extensions and OpenAI's audio / predicted outputs: not implemented (NEUTRAL)
    echo: Optional[Any] = None
    continue_final_message: Optional[Any] = None
    add_generation_prompt: Optional[Any] = None
    prediction: Optional[Any] = None
    audio: Optional[Any] = None
    modalities: Optional[Any] = None

    def unsupported(self) -> Optional[str]:
        for key in ("tools", "functions", "logprobs", "top_logprobs"):
            if getattr(self, key):
                return key
        if self.tool_choice not in (None, "none", "auto"):
            return "tool_choice"
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            return "response_format"
        if any(m.tool_calls for m in self.messages):
            return "messages[].tool_calls"
        return super().unsupported()

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Sampling):
    prompt: Union[Text, list[Text]]
    echo: bool = False
    suffix: Optional[Text] = None
    logprobs: Optional[int] = None

    def unsupported(self) -> Optional[str]:
        for key in ("echo", "suffix", "logprobs"):
            if getattr(self, key):
                return key
        return super().unsupported()

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_tokens


class ClassifyRequest(_Body):
    model: Text = Field(min_length=1, max_length=256)
    input: Union[Text, list[Text]]

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


# --- responses ------------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChunkChoice(BaseModel):
    index: int
    delta: dict
    finish_reason: Optional[str] = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Optional[Usage] = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Optional[str] = None
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Optional[Usage] = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "steadytune"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Classification(BaseModel):
    index: int
    label: str
    probabilities: dict[str, float]


class ClassifyResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    model: str
    data: list[Classification]
    usage: Usage


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    running: int          # sequences in the running batch
    queued: int           # sequences and classification jobs waiting


class ErrorDetail(BaseModel):
    message: str
    type: str             # invalid_request_error | authentication_error | server_error
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorResponse(BaseModel):
    """Every error, in OpenAI's shape."""
    error: ErrorDetail
