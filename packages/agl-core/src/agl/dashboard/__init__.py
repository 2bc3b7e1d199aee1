"""The dashboard: a run in the browser, read from the store's HTTP API.

``agl store serve`` serves it at ``/``; ``agl dashboard --store URL`` serves it on its own in
front of any store server. See :mod:`agl.dashboard._app` (serving) and
:mod:`agl.dashboard._views` (what the pages read besides the store's own routes).
"""

from agl.dashboard._app import PUBLIC_PATHS, create_dashboard_app, mount_dashboard

__all__ = ["PUBLIC_PATHS", "create_dashboard_app", "mount_dashboard"]
