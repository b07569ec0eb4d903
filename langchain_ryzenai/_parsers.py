"""The strict JSON output parser of ``with_structured_output``."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pydantic.v1
from langchain_core.exceptions import OutputParserException
from langchain_core.output_parsers.transform import BaseCumulativeTransformOutputParser
from langchain_core.outputs import Generation
from langchain_core.utils.json import parse_partial_json

__all__ = ["StrictJsonOutputParser"]


class StrictJsonOutputParser(BaseCumulativeTransformOutputParser[Any]):
    """JSON output, validated into ``pydantic_object`` when one is given.

    Partial objects while streaming (as LangChain's JSON parsers do); the final result is
    parsed with strict ``json.loads``. LangChain's own parsers repair cut-off JSON; a cut-off
    answer here is an error instead.
    """

    pydantic_object: Any = None
    """A pydantic (v2 or v1) class to validate into, or None for plain JSON."""

    @property
    def _type(self) -> str:
        return "ryzenai_strict_json"

    def parse(self, text: str) -> Any:
        """Parse (and validate) a whole answer."""
        return self._validate(_strict_json(text))

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        """Parse (and validate) the model's text; strictly unless ``partial``."""
        if not partial:
            return self.parse(result[0].text)
        try:
            obj = parse_partial_json(result[0].text)
        except json.JSONDecodeError:
            return None
        if obj is None or self.pydantic_object is None:
            return obj
        try:
            return self._validate(obj)
        except OutputParserException:
            return None  # not a whole object yet

    def _validate(self, obj: Any) -> Any:
        model = self.pydantic_object
        if model is None:
            return obj
        try:
            if issubclass(model, pydantic.BaseModel):
                return model.model_validate(obj)
            return model.parse_obj(obj)  # a pydantic.v1 model
        except (pydantic.ValidationError, pydantic.v1.ValidationError) as exc:
            text = json.dumps(obj, ensure_ascii=False)
            raise OutputParserException(
                f"Failed to parse {model.__name__} from completion {text}: {exc}", llm_output=text
            ) from exc


def _strict_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputParserException(
            f"the model's answer is not one complete JSON value ({exc}); cut-off JSON is not repaired",
            llm_output=text,
        ) from exc
