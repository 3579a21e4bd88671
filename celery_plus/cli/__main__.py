"""``python -m celery_plus.cli``: the ``celery-plus`` command."""

from . import main

if __name__ == "__main__":
    main()
