"""CF-CL (Wagle et al. 2022): D2D iteration periods with reserve pushes and pulls
(``local.schedule: exchange``), over the device graph, reserve push, importance pull and delay model
of this folder. Part of the parts room: it imports no other part.
"""
