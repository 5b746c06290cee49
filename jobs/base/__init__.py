"""The ground floor: what every other folder of jobs stands on, and which imports nothing of the project but
itself. Locations and filesystems (storage), the tables' schemas and the cast to them (tables), Hive-style
folders (hive), the Arrow helpers (arrow), the package's data folders (data), and the errors a user is told
about (errors)."""
