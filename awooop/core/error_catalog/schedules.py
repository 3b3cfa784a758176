"""Errors of schedules (:mod:`awooop.schedules`)."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError


class ScheduleCronError(AwoooPError):
    """A schedule's cron expression is five fields (minute hour day-of-month month
    day-of-week: numbers, names, lists, ranges and steps) that fire at least the minimum
    interval apart; nothing was written."""

    code = "E-SCHEDULE-001"
    http_status = 400


class ScheduleTimezoneError(AwoooPError):
    """A schedule's timezone is an IANA time zone name (``Europe/Madrid``, ``UTC``); nothing
    was written."""

    code = "E-SCHEDULE-002"
    http_status = 400


class SchedulePolicyError(AwoooPError):
    """A schedule's catch-up is latest, all or skip, its overlap skip, allow or
    cancel_previous, and its catch-up window and jitter are durations within their bounds;
    nothing was written."""

    code = "E-SCHEDULE-003"
    http_status = 400


class ScheduleNotFoundError(AwoooPError):
    """No such schedule in this project."""

    code = "E-SCHEDULE-004"
    http_status = 404


class ScheduleLimitError(AwoooPError):
    """The project has as many schedules as it may (``AWOOOP_SCHEDULES_PER_PROJECT``); delete
    one first. Nothing was written."""

    code = "E-SCHEDULE-005"
    http_status = 409
