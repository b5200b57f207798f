"""Real protocol peers on loopback: a Redfish HTTP service, an SNMP agent, a Modbus meter.

Tests run the collectors against them, and the simulator uses them to expose its
virtual CDUs, PDUs and meters, so a demo exercises the same code as a real site.
Each peer binds 127.0.0.1 on a port chosen at start (port 0) and can be started
and stopped from plain code or from inside an asyncio program.
"""
