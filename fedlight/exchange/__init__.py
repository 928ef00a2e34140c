"""Device-to-device data exchange (CF-CL): the device graph, the reserve push, the importance pull."""
