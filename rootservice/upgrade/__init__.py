"""Versions and upgrades: this RS's release, the cluster version, the version skew rule at
lease time (:mod:`rootservice.upgrade.versions`) and finalizing a rolling upgrade
(:mod:`rootservice.upgrade.finalize`)."""
