import sys

from t4lib.cli import main

sys.exit(main())
