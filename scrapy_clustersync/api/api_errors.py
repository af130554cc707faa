"""Every error of the HTTP API is JSON ``{"error": "..."}`` with its status: 401/403 (token),
404 (no such job or path), 409 (cannot be done as the job is), 422 (a bad body, path or value:
the message says what was wrong), 503 (Redis unreachable or refusing serve)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..config import ConfigError
from ..store import StoreError, StoreUnavailable
from ..store.errors import AccessRefused


class ApiError(Exception):
    """An answer other than 2xx: ``status`` and a message for people."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def validation_message(errors: Sequence[Any]) -> str:
    """What was wrong with a request, one clause per error: where, then what."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else
                     str(error.get("msg", "invalid")))
    return "bad request: " + "; ".join(parts)


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message)


async def _bad_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, validation_message(exc.errors()))


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, str(exc.detail))


async def _bad_value(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(422, str(exc))


async def _redis_failed(_request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, StoreUnavailable):
        return error_response(503, f"Redis could not be reached or cannot serve now: {exc}")
    if isinstance(exc, AccessRefused):
        return error_response(503, "Redis refused this server (check the user and password in "
                                   f"the URL, and the ACL): {exc}")
    return error_response(500, f"Redis answered with an error: {exc}")


def install_error_handlers(app: FastAPI) -> None:
    """Turn every error into ``{"error": ...}`` with its status."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ConfigError, _bad_value)
    app.add_exception_handler(StoreError, _redis_failed)
