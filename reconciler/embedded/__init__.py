"""The embedded default: a local vastsim and a local Ray head, for `ray-vast up` with no account.

Both run as detached background processes recorded in the state directory, so `ray-vast down`
(another process, later) can find them, end the cluster, and stop them; nothing is left running.

May import `childenv` and itself (it starts vastsim and Ray as processes, by command line);
never the pure core's decisions.
"""
