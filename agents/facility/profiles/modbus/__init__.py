"""Modbus register maps: register -> metric, type, word order, unit."""
