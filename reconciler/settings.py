"""The engine's settings: every timing the controller runs on, in one place (kopf's `configs`).

A spec sets what a user decides (cadences, watchdog thresholds, idle windows, budgets); these are
the engine's own: how soon a failed listing is retried, how a failing cluster backs off, how long
an alert is held back as a repeat, how long an ended record is kept. They were spread over the
modules that read them, under names that collided (two alert windows under one name); here each
is written once, with why it is what it is. Plain constants: the pure core may read them.
"""

from __future__ import annotations

# --- the loop -------------------------------------------------------------------------------

# vast allows one create every 4.5 s per account (`reference/vast-api.md`); the client sends them
# 0.1 s wider (`vast/endpoints.py`, DEFAULT_MIN_INTERVALS["asks"], held equal by a test). A
# request holds no more open slots than creates at this pace can give candidates before its
# provision deadline (planning/scaling.py `paced`).
CREATE_PACE_SECONDS = 4.6

# A listing the records' deadlines ask for comes no sooner than this after one that failed (an
# outage at vast must not turn the deadlines into a request loop).
LISTING_RETRY_SECONDS = 10.0
# Clusters no longer declared are pruned on this cadence (the default reconcile cadence).
PRUNE_SECONDS = 60.0
# With nothing scheduled at all, the loop looks again after this.
IDLE_WAKEUP_SECONDS = 30.0
# A cluster whose part of a tick raised is retried after this, doubling to the cap (kopf backs
# off a handler that failed the same way); the runner's own loop backs off on the same numbers.
FAILURE_BACKOFF_FIRST_SECONDS = 5.0
FAILURE_BACKOFF_MAX_SECONDS = 300.0
# How long Ray has to drain an idle node (autoscaler v2's deadline) before the money chain's end
# goes ahead anyway.
IDLE_DRAIN_DEADLINE_SECONDS = 60.0

# --- alerts and memory ----------------------------------------------------------------------

# The same alert (cluster, class, record) is raised at most once in this window, wherever it is
# raised (planner, controller, head); the ledger still has every detection.
ALERT_REPEAT_SECONDS = 3600.0
# Ended machines and closed requests leave the state after this (their bill stays in the
# ledger): every save writes the whole state.
RETENTION_SECONDS = 24 * 3600.0
# A heartbeat that only moves a worker's clocks (its own report clock, its utilisation sample)
# is kept in memory at once, where every decision reads it, and written with the next save or
# within this long: a save writes the whole state (~0.1 s at 1,000 workers, whose heartbeats
# come 33 a second), and a crash that loses this much of a report clock is far inside
# went-silent's 5 minutes.
KEPT_CLOCKS_SECONDS = 10.0

# --- vast calls -----------------------------------------------------------------------------

# A destroy or stop vast has not confirmed is sent again after this, doubling, at most the cap.
RETRY_FIRST_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0
# A stop vast accepted is looked at again after this long: still running means send it again.
STOP_CONFIRM_SECONDS = 120.0
