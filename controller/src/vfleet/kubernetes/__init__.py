"""`vfleet render --target lws`: the same typed plan as LeaderWorkerSet manifests.

The inputs the plan does not know (image, namespace, storage, scheduling) are
vfleet.documents.lws; then groups (each pool's engines as LWS groups: pods per engine, GPUs
per pod, launch mode) -> pods (the leader's and workers' containers, their flags from the
code the host render uses) -> manifests (the objects) -> schema_checks (yamllint, the core
kinds' schemas, the LWS CRD's schema read strictly) -> lws_render (the checks no schema can
express, then the files).
"""
