"""The Textual face of ``ncclcheck watch``: renders WatchStates from a data source; never touches a process."""
