"""Pure math: roofline step times, acceptance models, the five guidelines, the search. No torch."""
