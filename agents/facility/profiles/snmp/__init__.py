"""SNMP device profiles: OID -> metric, scale, unit, index handling."""
