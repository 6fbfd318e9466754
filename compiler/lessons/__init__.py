"""The lessons' exercise checkers and runner, installed with wavefuse so a lesson runs anywhere."""
