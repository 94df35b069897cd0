"""Candidate groups -> best tile per group and layer -> exact choice of groups -> Plan."""
