from ascend_doctor.cli.main import main

if __name__ == "__main__":  # not when a spawned worker process imports it as __mp_main__
    main()
