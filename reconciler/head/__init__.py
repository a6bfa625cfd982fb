"""The head's services for the workers (DESIGN.md section 6): enrollment, heartbeats, reports, the
agent download, and the cluster PKI behind them.

The protocol is written down as JSON Schemas (`reconciler/schemas/agent-*.v1.json`):

    enrollment port (TLS, the agent pins the cluster CA)
      POST /enroll      agent-enroll-request  -> agent-enroll-response | agent-error (400/403/503)
      POST /report      agent-report          -> {"ok": true} | agent-error (403: still ledgered)
      GET  /agent       the agent zip, header X-RV-Agent-SHA256
    heartbeat port B (mutual TLS, only this cluster CA's client certificates)
      POST /heartbeat   agent-heartbeat       -> {"ok": true, ...} | agent-error (403)

How the pieces fit:

    pki = ClusterPki.load_or_create(pki_dir(state_dir, name), name, spec.head.address, now=...)
    service = HeadService(spec=spec, cluster_pki=pki, host=journal, ledger=journal,
                          applier=controller.applier, lineage=journal.lineage, clock=clock)
    launcher = service.launcher(vast_url=vast_client.base_url, clock=clock,
                                forbidden=(api_key,))     # the executor's Launcher
    service.start() ... service.stop()

- `host` is a `RecordsStore` (`lock`, `records()`, `update(change)`): the watch controller's
  `Journal`, or a `SharedRecords`; every decision runs under its lock and saves through it.
- `ledger` is a `LedgerSink` (`append(LedgerEvent)`: the journal's ledger).
- Decisions are pure (`enrollment.enroll`, `heartbeats.heartbeat`, `reports.report`): records and
  a message in, new records plus notes, destroys and a refusal out.
- The head's own destroys (extra candidates when a request fills, a failed token check) are plan
  actions handed to the one applier (`reconciler.applying.applier`), whose thread makes the calls:
  intent saved first (in the decision), outcome after.
- The latest utilisation sample of each worker lands on its record (`sample_at`, `sample_busy`).
- The Ray head must run with `RAY_AUTH_MODE=token` and the token file
  `RAY_AUTH_TOKEN_PATH=pki.ray_auth_token_path`: the token every worker is given.

May import `applying` (the one applier it hands its destroys to), `planning` (alerts, pins),
`model`, `state`, `clock` and the error root; never `watch` or `cli`.
"""
