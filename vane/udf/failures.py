"""How a user function's failure reaches the user: described in one line, and raised as an error
that is both a ``vane.errors.UDFError`` and an instance of the user's own exception class, so
``except ValueError`` around an action catches the ``ValueError`` a UDF raised (Ray does the same
with its ``RayTaskError(ValueError)`` classes).

A class cannot always be used: a worker process may raise an exception whose class only it can
import, and some classes cannot be combined with another base (``ExceptionGroup``, whose
constructor insists on its own arguments; a class that refuses subclasses). Then the error
stays a plain ``UDFError``, and the cause keeps the class's name, its nearest builtin base and
its text (a *stand-in*).
"""

from __future__ import annotations

import builtins
import contextlib
import traceback
from types import GetSetDescriptorType, MemberDescriptorType
from typing import Any

from vane.errors import UDFError


def describe_exception(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def builtin_base(cls: type[BaseException]) -> str:
    """The name of the nearest builtin exception class ``cls`` derives from."""
    for base in cls.__mro__:
        if base.__module__ == "builtins" and issubclass(base, Exception):
            return base.__name__
    return "Exception"


_stand_ins: dict[tuple[str, str, str], type[Exception]] = {}


def stand_in(module: str, qualname: str, base: str, text: str) -> Exception:
    """An exception that prints as ``module.qualname: text`` and derives from the builtin
    ``base``, for an exception whose class cannot be loaded here."""
    key = (module, qualname, base)
    cls = _stand_ins.get(key)
    if cls is None:
        parent = getattr(builtins, base, Exception)
        if not (isinstance(parent, type) and issubclass(parent, Exception)):
            parent = Exception
        try:
            cls = type(qualname.rpartition(".")[2], (parent,), {"__module__": module})
        except TypeError:  # a builtin base that refuses subclasses
            cls = type(qualname.rpartition(".")[2], (Exception,), {"__module__": module})
        cls.__qualname__ = qualname
        _stand_ins[key] = cls
    try:
        return cls(text)
    except Exception:  # a builtin base whose constructor wants more arguments
        return Exception(f"{qualname}: {text}")


_catchable: dict[type[BaseException], type[UDFError] | None] = {}


def _catchable_class(cause: type[BaseException]) -> type[UDFError] | None:
    if cause in _catchable:
        return _catchable[cause]
    name = f"UDFError({cause.__name__})"

    def __str__(self: UDFError) -> str:
        # The user's class may format itself from attributes this instance does not have.
        return str(self.args[0]) if self.args else ""

    def __reduce__(self: UDFError) -> tuple[Any, ...]:
        # The class is made here and cannot be imported elsewhere: it pickles as a UDFError.
        return (UDFError, self.args)

    namespace = {
        "__module__": UDFError.__module__,
        "__qualname__": name,
        "__init__": UDFError.__init__,
        "__str__": __str__,
        "__reduce__": __reduce__,
    }
    try:
        made: type[UDFError] | None = type(name, (UDFError, cause), namespace)
    except TypeError:  # an instance layout or metaclass that cannot be combined with ours
        made = None
    _catchable[cause] = made
    return made


def catchable(error: UDFError) -> UDFError:
    """``error`` as an instance of both ``UDFError`` and its cause's class, where possible."""
    cause = error.__cause__
    if type(error) is not UDFError or not isinstance(cause, Exception):
        return error
    cls = _catchable_class(type(cause))
    if cls is None:
        return error
    try:
        upgraded = cls(*error.args)
    except Exception:  # a __new__ that insists on the user's own arguments
        return error
    _copy_attributes(cause, upgraded)
    upgraded.__cause__ = cause
    upgraded.__traceback__ = error.__traceback__
    return upgraded


def _copy_attributes(source: BaseException, target: BaseException) -> None:
    """The user's exception's attributes (an errno, a filename, a status code) on ``target``:
    those in its ``__dict__``, and the fields builtin exception classes keep as members (of
    their C struct)."""
    for cls in type(source).__mro__:
        if cls.__module__ != "builtins" or cls in (BaseException, object):
            continue
        for name, member in vars(cls).items():
            if isinstance(member, (MemberDescriptorType, GetSetDescriptorType)):
                with contextlib.suppress(AttributeError, TypeError, ValueError):
                    setattr(target, name, getattr(source, name))
    with contextlib.suppress(AttributeError, TypeError):
        target.__dict__.update(vars(source))
